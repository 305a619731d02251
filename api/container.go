package api

// ReservedContainerPaths are the paths inside an execute tool's container
// that sluice mounts itself (the system's read-only directories, /proc,
// /dev and its own helper at /.sluice). A tool's mount or cache may not
// lie under one: it would be hidden, or hide what sluice needs. authz
// checks a manifest's cache paths against it and the sandbox checks mount
// destinations; a test in authz holds sandbox.Reserved to this list.
var ReservedContainerPaths = []string{"/usr", "/etc", "/proc", "/dev", "/.sluice", "/bin", "/sbin", "/lib", "/lib64"}

// ContainerTmp is the container's /tmp: a tmpfs of its own per call, so
// nothing there outlives the call (a cache may not be placed there).
const ContainerTmp = "/tmp"
