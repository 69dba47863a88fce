"""Pictures of point-cloud neighbourhoods (Open3D optional: ``pip install "pcgeom[vis]"``).

* :func:`render_neighbourhoods` writes a PNG offscreen (no GPU, no display):
  Open3D when installed, else matplotlib;
* :func:`neighbourhood_geometries` gives the Open3D geometries to compose your own scene;
* :func:`show_neighbourhoods` opens an interactive window (needs a display);
* :func:`patch_colors` is the palette all three use.
"""

from pcgeom.vis.neighbourhoods import (
    Rendered,
    neighbourhood_geometries,
    patch_colors,
    render_neighbourhoods,
    show_neighbourhoods,
)

__all__ = ["Rendered", "neighbourhood_geometries", "patch_colors", "render_neighbourhoods", "show_neighbourhoods"]
