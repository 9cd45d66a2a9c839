"""quell: see, explain and beat performance interference from co-located tenants."""

__version__ = "0.1.0"
