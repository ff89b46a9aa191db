"""The consultant: a DNS-like gRPC service that maps hosts to the agents that own them."""
