"""The domain core: the paper's math, the workloads and the run's schemas.

Pure functions and plain data: no gRPC, no protobuf, no command line, so every piece can be
tested on hand-made inputs and read by the services and the application alike.
"""
