"""Hooks into training frameworks: a Hugging Face ``Trainer`` callback
(``layerscope.integrations.huggingface``)."""
