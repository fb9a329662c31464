"""`--cpus 0.5` where it is accepted: the script runs (the quota itself is the runtime's)."""
print("ok ran under --cpus 0.5")
done()
