"""What a batch holds and which rows this host takes: how the datasets' keys share one
batch (`schema`), the keys a batch keeps (`keys`), hosts and sharding (`hosts`)."""
