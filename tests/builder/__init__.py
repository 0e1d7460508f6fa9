"""build_loader's settings and the defaults it chooses."""
