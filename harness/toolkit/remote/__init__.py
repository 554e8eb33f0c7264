"""What runs under the toolkit's own Python: the conversion worker, the simulator server, their framing."""
__all__: list[str] = []
