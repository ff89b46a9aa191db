"""The emulated WAN lab: address plan, geo/ASN databases, synthetic web, link model (issue #3)."""
