"""Generated protobuf and gRPC code for the wancrawl.v1 package (see wancrawl/genproto.py)."""
