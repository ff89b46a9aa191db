"""wancrawl's shared package: URLs, host resolution, config, gRPC helpers and the generated protos."""
