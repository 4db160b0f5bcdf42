"""What runs leave behind, read back: per-question scores (`scores`), paired significance tests (`significance`)."""
