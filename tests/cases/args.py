"""Arguments after `--` arrive verbatim."""
print("argv: " + json.dumps(sys.argv[1:]))
done()
