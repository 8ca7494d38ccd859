"""gRPC helpers shared by every service: servers, channels, chunked tensors, deadlines."""
