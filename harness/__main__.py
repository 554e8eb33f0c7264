import sys

from .cli.main import main

# Guarded: prefetch worker processes are spawned, and spawn imports the parent's __main__ again.
if __name__ == "__main__":
    sys.exit(main())
