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
 * With a last argument STATUS_FD (after N FLAGS, or alone), it stays the
 * container's PID 1 instead of becoming the command: it starts the command
 * as its child, reaps every process the namespace orphans, and once the
 * command ends writes "exit CODE\n" or "signal SIG\n" to STATUS_FD and
 * exits alike (128+SIG for a signal: PID 1 cannot die by a signal it
 * sends itself). The command as PID 1 would lose the signals it sends
 * itself: the kernel ignores a signal PID 1 of a pid namespace sends
 * itself without a handler, so `kill -TERM $$` ran on and was reported as
 * exit 0, and abort(3) as a SIGSEGV.
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
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#define MAX_ARGV (1 << 20)
#define PROTOCOL "sluice-helper seccomp-fd status-fd"
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

/* run execs the command; it returns only when it could not, having said
 * why with write(2) alone (it may run in a vfork child). */
static int run(char **argv) {
	execvp(argv[0], argv);
	int err = errno;
	const char *why = strerror(err);
	struct iovec iov[] = {
		{"sluice: ", 8}, {argv[0], strlen(argv[0])}, {": ", 2}, {(void *)why, strlen(why)}, {"\n", 1},
	};
	(void)writev(2, iov, 5);
	return err == ENOENT ? 127 : 126;
}

int main(int argc0, char **argv0) {
	/* sluiced asks once, at start, whether this helper loads filters. */
	if (argc0 == 2 && strcmp(argv0[1], "--protocol") == 0) {
		puts(PROTOCOL);
		return 0;
	}
	/* Not dumpable: a command runs as the same uid as this process, and
	 * must not be able to ptrace it or write its memory through /proc/1
	 * (sluiced trusts its status report; see reported in sandbox). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
		perror("sluice-helper: prctl");
		return 126;
	}
	int status_fd = -1;
	if (argc0 == 2 || argc0 == 4) {
		char *end;
		errno = 0;
		long fd = strtol(argv0[argc0 - 1], &end, 10);
		if (errno || *end || end == argv0[argc0 - 1] || fd < 3 || fd > 1024) {
			fputs("sluice-helper: bad status fd\n", stderr);
			return 126;
		}
		status_fd = (int)fd;
		argc0--;
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
	if (status_fd < 0)
		return run(argv);
	/* vfork: the parent has nothing to do until the exec, and no page
	 * tables are copied (measured no slower than fork; the 0.2-0.3 ms a
	 * pooled call pays is the second process's exit and wake-up). The
	 * child only closes, execs and, failing that, reports and _exits. */
	pid_t child = vfork();
	if (child < 0) {
		perror("sluice-helper: vfork");
		return 126;
	}
	if (child == 0) {
		close(status_fd);
		_exit(run(argv));
	}
	/* Only the command holds its output pipes now, so sluiced sees their
	 * end as soon as the command and whatever it started are gone, without
	 * waiting for this process's own exit. Nothing below writes to them. */
	close(1);
	close(2);
	int st = 0;
	for (;;) {
		pid_t w = waitpid(-1, &st, 0);
		if (w == child)
			break;
		if (w < 0 && errno != EINTR)
			return 126;
	}
	char msg[32];
	int code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
	int len = WIFSIGNALED(st) ? snprintf(msg, sizeof msg, "signal %d\n", WTERMSIG(st))
	                          : snprintf(msg, sizeof msg, "exit %d\n", code);
	while (write(status_fd, msg, (size_t)len) < 0 && errno == EINTR)
		;
#ifdef SLUICE_HELPER_LINGER_MS
	/* Tests only: a PID 1 slow to exit after its report, so that a test
	 * can see what a call returns before PID 1 is gone. */
	usleep(SLUICE_HELPER_LINGER_MS * 1000);
#endif
	return code;
}
