"""The command line (`hymem-eval`), the top of the pipeline: argument checks that answer before heavy imports,
output-file guards, and the subcommands that run each stage."""
