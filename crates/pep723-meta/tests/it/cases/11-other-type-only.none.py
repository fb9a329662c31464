# /// other
# anything = [ not toml
# ///
print(1)
