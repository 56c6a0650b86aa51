//! End-to-end boots of real QEMU VMs through bootvol. Being written.
