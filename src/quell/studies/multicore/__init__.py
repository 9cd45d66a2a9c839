"""The multicore study: measure a static server with its receive soft interrupts on one core
and spread over all (``measure``), fit Chen et al.'s model to it and blind-predict one
configuration from the other (``report``)."""
