"""Plain-PyTorch ops shared by genrec's models and its kernels package (genrec_kernels): jagged <-> padded helpers
and HSTU's relative bias and pointwise attention. Both import from here; models and kernels never import each
other (models reach the kernels only through the attention registry, at call time)."""
