"""KRaft's quorum protocol (KIP-595) for the metadata log: the sans-IO state machine (`quorum`), the view of the
log it needs (`log_view`) and the mapping to Kafka's Vote/BeginQuorumEpoch/EndQuorumEpoch/DescribeQuorum messages
(`messages`). No asyncio, sockets or files here: kjbod.controller.raft_driver is the shell that drives it."""
