"""The AI Horde side: the native and text clients, the Redis readers, cancels and the ports the layers above use."""
