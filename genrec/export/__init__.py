"""Export for serving: faiss indexes over item vectors, the user tower through torch.export, a JSON manifest."""
