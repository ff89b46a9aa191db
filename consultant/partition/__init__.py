"""Partition strategies, registered by name: hash, xor, geo, asn, weighted.

Each strategy's options type lives beside it; `create_from_config(name, table)` builds one
from plain config data, with no consultant service or settings involved.
"""

from consultant.partition import asn, geo, rendezvous, xor  # noqa: F401  (registers them)
from consultant.partition.base import (
    PARTITIONERS, AgentView, Partitioner, Placement, Scored, Site, create, create_from_config, parse_options,
)

__all__ = [
    "PARTITIONERS", "AgentView", "Partitioner", "Placement", "Scored", "Site", "create", "create_from_config",
    "parse_options",
]
