"""What a reader sees: paper tables (`tables`) and their exporter (`export`), figures, notebook
display, the HTML report, the sample viewer, the failure-case explorer, the data dictionary,
`recompute`, `reproduce`, the paper build and terminal tables (`terminal`)."""
