# /// script
# dependencies = []
