"""Task catalogs: which tasks each registered id serves. Pure data, no simulator imports."""
