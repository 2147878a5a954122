"""Using a trained model: loading, exporting, predicting; nothing here needs training."""
