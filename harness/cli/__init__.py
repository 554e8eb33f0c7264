"""`python -m harness COMMAND`: one module per command, registered in main.py."""
