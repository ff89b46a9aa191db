"""Partition strategies, registered by name: hash, xor, geo, asn, weighted."""

from consultant.partition import asn, geo, rendezvous, xor  # noqa: F401  (registers them)
from consultant.partition.base import PARTITIONERS, AgentView, Partitioner, Placement, Scored, Site, create

__all__ = ["PARTITIONERS", "AgentView", "Partitioner", "Placement", "Scored", "Site", "create"]
