"""Reading what users hand the toolkit: their model folders (`model_folder`)."""
