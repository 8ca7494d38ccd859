"""The rpc floor: what every service shares on the wire and around it. Servers, channels,
chunked tensors, deadlines, auth and TLS, the service process runtime and its metrics, and
the protobuf form of the core's site table."""
