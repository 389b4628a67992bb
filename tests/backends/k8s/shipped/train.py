"""The script of the test jobs whose workdir is shipped to their pods (rendered, not run)."""
print("training")
