"""KRaft's quorum protocol (KIP-595) for the metadata log: the sans-IO state machine (`quorum`) and the view of
the log it needs (`log_view`). No asyncio, sockets or files here: the controller's shell drives it."""
