"""Who may do what: signed identities, cube access, and the data keys that erase a cube."""
