//! kitbag-vm's Kubernetes backend against the in-repo API fixture (placeholder until the
//! fixture lands).
