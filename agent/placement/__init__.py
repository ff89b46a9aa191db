"""placement: who owns a host. The Placement port (port.py) and today's consultant-backed
implementation (consultant.py), the host directory and its cache, membership (register, lease,
leave), the gate (the lease fence and held hosts) and the load level heartbeats carry. The only
room that talks to the consultant. Imports settings and the consultant's client."""
