//go:build linux && cgo

package inithandoff

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

extern char **environ;

#define HANDOFF_FD 3
// The seals libcontainer's exeseal requires of a cloned binary.
#define HANDOFF_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

static void handoff_die(const char *why) {
	const char *pre = "sluice: container init: ";
	ssize_t n;
	n = write(2, pre, strlen(pre));
	n = write(2, why, strlen(why));
	n = write(2, "\n", 1);
	(void)n;
	_exit(1);
}

// glibc passes argc, argv and envp to constructors. The environment of a
// container's init is libcontainer's own (_LIBCONTAINER_*); argv is
// {ARGV0, "init"}.
__attribute__((constructor)) static void sluice_init_handoff(int argc, char **argv) {
	if (argc != 2 || strcmp(argv[1], "init") != 0 || getenv("_LIBCONTAINER_INITPIPE") == NULL)
		return;
	// Only a sealed memfd is run: nothing (no container, no one on the
	// host) can have changed it since sluiced checked and copied it.
	int seals = fcntl(HANDOFF_FD, F_GET_SEALS);
	if (seals < 0 || (seals & HANDOFF_SEALS) != HANDOFF_SEALS)
		handoff_die("fd 3 is not the sealed sluice-init: this binary is never a container's init");
	int exe = fcntl(HANDOFF_FD, F_DUPFD_CLOEXEC, HANDOFF_FD + 1);
	if (exe < 0)
		handoff_die("dup sluice-init");
	// fd 3 stays open (the fds after it keep their numbers) but on
	// /dev/null, which sluice-init marks close-on-exec: no process of
	// the container holds sluice-init, or fd 3 at all.
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, HANDOFF_FD) < 0)
		handoff_die("open /dev/null");
	close(null);
	argv[0] = "sluice-init";
	syscall(SYS_execveat, exe, "", argv, environ, AT_EMPTY_PATH);
	handoff_die("execveat sluice-init failed");
}
*/
import "C"

// Linked reports that the constructor is in this binary.
const Linked = true
