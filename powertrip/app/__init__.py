"""The application: the `powertrip` command line, experiments, the paper's figures, reports
and site bundles. It starts the services as processes (by module name) and never imports
them; nothing in the library or the services imports this floor."""
