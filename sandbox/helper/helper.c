/*
 * sluice-helper: the first process of a warm sandbox container.
 *
 * It is started by libcontainer inside a fully set-up container (mounts,
 * namespaces, cgroups, seccomp, no capabilities, no_new_privs, uid 65534)
 * and blocks reading stdin. sluiced writes the authorized argv as
 * NUL-terminated strings and closes the pipe; the helper then execs it, so
 * the command starts in well under a millisecond, and its stdin is the same
 * pipe, already at end of file (an empty stdin).
 *
 * It is static so that it depends on nothing inside the container, and
 * small so that a waiting container costs little memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGV (1 << 20)

static char buf[MAX_ARGV + 1];

int main(void) {
	size_t n = 0;
	for (;;) {
		ssize_t r = read(0, buf + n, MAX_ARGV - n);
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("sluice-helper: read argv");
			return 126;
		}
		n += (size_t)r;
		if (n == MAX_ARGV) {
			fputs("sluice-helper: argv larger than 1 MiB\n", stderr);
			return 126;
		}
	}
	if (n == 0 || buf[n - 1] != '\0') {
		fputs("sluice-helper: no argv received\n", stderr);
		return 126;
	}
	size_t argc = 0;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			argc++;
	char **argv = calloc(argc + 1, sizeof(char *));
	if (!argv)
		return 126;
	size_t start = 0, k = 0;
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\0') {
			argv[k++] = buf + start;
			start = i + 1;
		}
	}
	argv[argc] = NULL;
	execvp(argv[0], argv);
	int err = errno;
	fprintf(stderr, "sluice: %s: %s\n", argv[0], strerror(err));
	return err == ENOENT ? 127 : 126;
}
