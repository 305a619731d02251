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
 * With arguments N FLAGS, it first loads the container's seccomp filter: a
 * compiled program (struct sock_filter[]) that sluiced wrote into the pipe
 * at fd N, compiled once per tool rather than in every container's init,
 * with seccomp(2) flags FLAGS (what libcontainer would have used).
 * no_new_privs is already set, so seccomp(2) needs no privilege. It closes
 * fd N, and if anything fails it exits 126 without ever reading or running
 * an argv: a command never runs without its filter.
 *
 * It is static so that it depends on nothing inside the container, and
 * small so that a waiting container costs little memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#define MAX_ARGV (1 << 20)
#define PROTOCOL "sluice-helper seccomp-fd"
#define MAX_PROG (BPF_MAXINSNS * sizeof(struct sock_filter))

static char buf[MAX_ARGV + 1];
static struct sock_filter prog[BPF_MAXINSNS + 1];

static int load_filter(const char *arg, const char *flagarg) {
	char *end;
	errno = 0;
	long fd = strtol(arg, &end, 10);
	if (errno || *end || end == arg || fd < 3 || fd > 1024) {
		fputs("sluice-helper: bad seccomp fd\n", stderr);
		return -1;
	}
	errno = 0;
	unsigned long flags = strtoul(flagarg, &end, 10);
	if (errno || *end || end == flagarg) {
		fputs("sluice-helper: bad seccomp flags\n", stderr);
		return -1;
	}
	size_t n = 0;
	for (;;) {
		ssize_t r = read((int)fd, (char *)prog + n, sizeof(prog) - n);
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("sluice-helper: read seccomp program");
			return -1;
		}
		n += (size_t)r;
		if (n > MAX_PROG) {
			fputs("sluice-helper: seccomp program too long\n", stderr);
			return -1;
		}
	}
	close((int)fd);
	if (n == 0 || n % sizeof(struct sock_filter) != 0) {
		fputs("sluice-helper: bad seccomp program\n", stderr);
		return -1;
	}
	struct sock_fprog fp = {.len = (unsigned short)(n / sizeof(struct sock_filter)), .filter = prog};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fp) != 0) {
		perror("sluice-helper: load seccomp filter");
		return -1;
	}
	return 0;
}

int main(int argc0, char **argv0) {
	/* sluiced asks once, at start, whether this helper loads filters. */
	if (argc0 == 2 && strcmp(argv0[1], "--protocol") == 0) {
		puts(PROTOCOL);
		return 0;
	}
	if (argc0 != 1 && (argc0 != 3 || load_filter(argv0[1], argv0[2]) != 0))
		return 126;
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
