"""placement: who owns a host. The Placement port (port.py) and its two implementations, the
consultant's (consultant.py) and the Kademlia overlay's of the consultant-less mode (kademlia/),
the host directory and its cache, membership (register, lease, leave), the gate (the lease fence
and held hosts) and the load level heartbeats carry. The only room that talks to the consultant.
Imports settings, validate (a peer's Ping answer is checked as a request would be), the agent's
client (the overlay's transport), the consultant's client and wancrawl (among it the Kademlia
core, wancrawl/kademlia/); nothing of state."""
