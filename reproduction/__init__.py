"""The paper's reproduction, beside the library as a user's study would be: the figures and
studies (`reproduction.paper`, one module each, with the registry of them), the command that
plans, runs and renders them (`reproduction.reproduce`) and its place on the `powertrip`
command line (`reproduction.cli`, `powertrip reproduce`).

It imports the library (`powertrip`) and is never imported by it or by a service: the
library's planner and executor take the paper's registry as an argument, and its command
line finds `reproduction.cli` by name.
"""
