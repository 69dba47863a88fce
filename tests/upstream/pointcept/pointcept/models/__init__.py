# added (not upstream): Pointcept's models/__init__.py imports every model family (spconv, flash-attn, ...);
# this test needs only builder.py and the two Point Transformer packages, imported by module path.
