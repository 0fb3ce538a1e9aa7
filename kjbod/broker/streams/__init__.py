"""KIP-1071 streams groups: topology, sticky task assignor and the group state machine (no I/O)."""
