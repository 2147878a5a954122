"""Everything between raw files and batches: records, tokens, vocabulary, cache, datasets."""
