"""``sft``: build (or load) the base model and fine-tune it on the ``sft_data`` states with the shared loop."""
