"""The local chunk cache: a folder of verified entries shared by every process of a host."""
