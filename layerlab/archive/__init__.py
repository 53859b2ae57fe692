"""Privacy-safe record archives: the schema, reading and writing, vetting, migration, and the
private opt-in per-sample log (`samplelog`)."""
