"""Access: the directory of users and groups, and the decisions built on it."""
