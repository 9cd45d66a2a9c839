"""``python -m quell``: the same command line as the ``quell`` script."""

from quell.cli import entry

if __name__ == "__main__":
    entry()
