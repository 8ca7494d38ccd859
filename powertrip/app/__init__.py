"""The application: the `powertrip` command line, experiments, reports and site bundles.
It starts the services as processes (by module name) and never imports them; nothing in the
library or the services imports this floor. The paper's figures and their `reproduce` command
live beside the library, in `reproduction/`, which imports this floor and never the reverse."""
