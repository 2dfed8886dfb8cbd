"""Once per loader: make_loader's arguments resolved in phases (`resolve`) into one
`LoaderSpec` (`spec`); `make_loader` (its facade), the argument checks (`arguments`)."""
