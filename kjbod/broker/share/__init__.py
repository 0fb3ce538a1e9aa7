"""KIP-932 share groups: the group side (ShareGroupHeartbeat, ShareGroupDescribe), the share-partition side
(ShareFetch, ShareAcknowledge) and the share-group state they keep through a persister (`persister`)."""
