<?php

declare(strict_types=1);

namespace Veil\Tests\Support;

/**
 * A real `veil serve` for the tests, set up as a data owner would (README, "Running the service
 * for real"): in a temporary directory, a generated table (`veil demo --write`, never real
 * data), a `veil.toml` naming it and a SQLite ledger, keys made with `veil admin analyst add`;
 * then `veil serve` on a free port of 127.0.0.1, and budgets granted through it by the
 * administrator (`POST /v1/admin/grants`).
 *
 * The server runs under a small shell watchdog that stops it (SIGTERM) when this PHP process
 * is gone — even after a SIGKILL, when no shutdown function runs — and {@see stop()} (a
 * shutdown function) stops it at the end of the run, whether the tests passed or not.
 */
final class VeilServer
{
    /** Datasets of the catalog (all on the one generated table). */
    public const DATASET = 'people';
    public const PADDED = 'people_padded'; // the same rows; answers PAD_MS after the request
    public const PAD_MS = 1500;
    /** Grants for the mechanism endpoints (names an administrator chose; no table behind). */
    public const MECHANISMS = 'php-mechanisms';

    private static ?self $instance = null;

    /** @var resource|null */
    private $process = null;
    private ?int $serverPid = null;
    private bool $stopped = false;

    /** @var array<string, string> name → API key */
    public array $keys = [];

    private function __construct(
        public readonly string $veil,
        public readonly string $dir,
        public readonly string $ledger,
        public string $baseUrl = '',
    ) {
    }

    public static function get(): self
    {
        if (self::$instance === null) {
            throw new \LogicException('the test server was not started (tests/bootstrap.php starts it)');
        }
        return self::$instance;
    }

    /** Set everything up and start the server; it is stopped at shutdown. */
    public static function start(string $veil): self
    {
        if (self::$instance !== null) {
            return self::$instance;
        }
        $dir = sys_get_temp_dir() . '/veil-php-' . bin2hex(random_bytes(6));
        if (!mkdir($dir, 0700)) {
            throw new \RuntimeException("cannot create $dir");
        }
        $server = new self($veil, $dir, 'sqlite:///' . $dir . '/veil-ledger.db');
        self::$instance = $server;
        register_shutdown_function([$server, 'stop']);
        $server->deploy();
        $server->serve();
        $server->grantAll();
        return $server;
    }

    /**
     * Run `veil ARGS…` in the deployment's directory and return its standard output.
     *
     * @param list<string> $args
     */
    public function veil(array $args): string
    {
        return $this->veilAll([$args])[0];
    }

    /** `veil admin key revoke NAME`. */
    public function revoke(string $name): void
    {
        $this->veil(['admin', 'key', 'revoke', $name, '--config', $this->config()]);
    }

    /**
     * The generated table's rows as the tests' ground truth (the service reads the same rows
     * from Parquet).
     *
     * @return list<array{user_id: int, state: string, age: int, income: float}>
     */
    public function rows(): array
    {
        $file = new \SplFileObject($this->dir . '/' . self::DATASET . '.csv');
        $header = null;
        $rows = [];
        while (($line = $file->fgetcsv()) !== false && $line !== [null]) {
            if ($header === null) {
                $header = $line;
                continue;
            }
            $row = array_combine($header, $line);
            $rows[] = [
                'user_id' => (int) $row['user_id'],
                'state' => (string) $row['state'],
                'age' => (int) $row['age'],
                'income' => (float) $row['income'],
            ];
        }
        return $rows;
    }

    public function config(): string
    {
        return $this->dir . '/veil.toml';
    }

    public function log(): string
    {
        return (string) @file_get_contents($this->dir . '/server.log');
    }

    /** Stop the server (SIGTERM, then SIGKILL after 10 s) and remove the directory. */
    public function stop(): void
    {
        if ($this->stopped) {
            return;
        }
        $this->stopped = true;
        if (is_resource($this->process)) {
            proc_terminate($this->process, 15); // the watchdog passes SIGTERM to the server
            $deadline = microtime(true) + 10;
            while (proc_get_status($this->process)['running'] && microtime(true) < $deadline) {
                usleep(50_000);
            }
            if (proc_get_status($this->process)['running']) {
                proc_terminate($this->process, 9);
            }
            proc_close($this->process);
            $this->process = null;
        }
        if ($this->serverPid !== null && posix_kill($this->serverPid, 0)) {
            posix_kill($this->serverPid, 9);
        }
        self::remove($this->dir);
    }

    private function deploy(): void
    {
        // a CSV file's columns are text unless declared: the catalog declares the numbers
        $dataset = static fn (string $name, int $padMs): string => <<<TOML

            [[datasets]]
            name = "$name"
            source = { kind = "file", path = "$name.csv" }
            schema = { user_id = "BIGINT", year = "BIGINT", age = "BIGINT", income = "DOUBLE" }
            privacy_unit = "user_id"
            max_groups = 1
            max_rows_per_group = 3
            bounds = { income = [0, 200000], age = [0, 120] }
            domains = { state = ["AZ", "CA", "FL", "GA", "IL", "NY", "OH", "PA", "TX", "WA"] }
            max_epsilon = 1.0
            min_response_ms = $padMs

            TOML;
        $toml = "ledger = \"{$this->ledger}\"\n\n[service]\n"
            . "rate_limit = 100000\n" // per minute per key: the exponential test sends 300 calls
            . "query_timeout_s = 30\n"
            . $dataset(self::DATASET, 0)
            . $dataset(self::PADDED, self::PAD_MS);
        file_put_contents($this->config(), $toml);
        $add = fn (string $name, string $role = 'analyst'): array => ['admin', 'analyst', 'add', $name,
            '--role', $role, '--config', $this->config(), '--format', 'json'];
        // the generated table (the tests read the same CSV as their ground truth) and the
        // first key, which creates the ledger; then the other keys, side by side
        [, $root] = $this->veilAll([
            ['demo', '--write', $this->dir . '/' . self::DATASET . '.csv', '--users', '2000'],
            $add('root', 'admin'),
        ]);
        $this->keys['root'] = self::key($root);
        $names = ['alice', 'bob', 'carol']; // the main analyst; revoked by a test; a small grant
        foreach ($this->veilAll(array_map($add, $names)) as $i => $out) {
            $this->keys[$names[$i]] = self::key($out);
        }
        // one source is one unit of accounting: the padded dataset gets a copy of its own
        copy($this->dir . '/' . self::DATASET . '.csv', $this->dir . '/' . self::PADDED . '.csv');
    }

    /** Budgets, granted by the administrator through the service (`POST /v1/admin/grants`). */
    private function grantAll(): void
    {
        $grants = [
            ['alice', self::DATASET, '20'],
            ['alice', self::PADDED, '5'],
            ['alice', self::MECHANISMS, '1000'],
            ['bob', self::DATASET, '1'],
            ['carol', self::DATASET, '1/2'],
            ['carol', self::MECHANISMS, '1/2'],
        ];
        foreach ($grants as [$analyst, $dataset, $epsilon]) {
            $curl = curl_init($this->baseUrl . '/v1/admin/grants');
            curl_setopt_array($curl, [
                CURLOPT_RETURNTRANSFER => true,
                CURLOPT_POSTFIELDS => json_encode(
                    ['analyst' => $analyst, 'dataset' => $dataset, 'epsilon' => $epsilon],
                ),
                CURLOPT_HTTPHEADER => [
                    'Authorization: Bearer ' . $this->keys['root'],
                    'Content-Type: application/json',
                ],
            ]);
            $body = curl_exec($curl);
            $status = curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
            curl_close($curl);
            if ($status !== 201) {
                throw new \RuntimeException("granting $epsilon on $dataset to $analyst: HTTP $status $body");
            }
        }
    }

    /**
     * Run several `veil` commands at once; their standard outputs, in order.
     *
     * @param list<list<string>> $commands
     * @return list<string>
     */
    private function veilAll(array $commands): array
    {
        $running = [];
        foreach ($commands as $args) {
            $process = proc_open(
                [$this->veil, ...$args],
                [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
                $pipes,
                $this->dir,
            );
            if (!is_resource($process)) {
                throw new \RuntimeException('cannot run ' . $this->veil);
            }
            $running[] = [$args, $process, $pipes];
        }
        $outputs = [];
        $failures = [];
        foreach ($running as [$args, $process, $pipes]) {
            $out = (string) stream_get_contents($pipes[1]);
            $err = (string) stream_get_contents($pipes[2]);
            fclose($pipes[1]);
            fclose($pipes[2]);
            $code = proc_close($process);
            if ($code !== 0) {
                $failures[] = sprintf("veil %s failed (exit %d):\n%s%s", implode(' ', $args), $code, $out, $err);
            }
            $outputs[] = $out;
        }
        if ($failures !== []) {
            throw new \RuntimeException(implode("\n", $failures));
        }
        return $outputs;
    }

    private static function key(string $json): string
    {
        $key = json_decode($json, true, 8, JSON_THROW_ON_ERROR)['key'] ?? null;
        if (!is_string($key)) {
            throw new \RuntimeException("veil admin analyst add printed no key: $json");
        }
        return $key;
    }

    private function serve(): void
    {
        $last = '';
        for ($attempt = 0; $attempt < 3; $attempt++) {
            $port = self::freePort();
            @unlink($this->dir . '/server.log');
            $this->launch($port);
            try {
                $this->waitReady($port, 60.0);
                $this->baseUrl = "http://127.0.0.1:$port";
                return;
            } catch (\RuntimeException $e) {
                $last = $e->getMessage();
                $this->kill();
                if (stripos($last, 'address already in use') === false) {
                    break;
                }
            }
        }
        throw new \RuntimeException($last);
    }

    private function launch(int $port): void
    {
        // sh runs the server in the background, writes its pid, and stops it when this PHP
        // process is gone or when sh itself is asked to stop (TERM)
        $watchdog = <<<'SH'
            "$@" & child=$!
            echo "$child" > server.pid
            trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT HUP
            while kill -0 "$child" 2>/dev/null && kill -0 "$PARENT_PID" 2>/dev/null; do
                sleep 0.2
            done
            kill -TERM "$child" 2>/dev/null
            wait "$child"
            SH;
        $log = $this->dir . '/server.log';
        $env = getenv();
        $env['PARENT_PID'] = (string) getmypid();
        $env['PYTHONUNBUFFERED'] = '1';
        $process = proc_open(
            ['/bin/sh', '-c', $watchdog, 'sh', $this->veil, 'serve', '--config', $this->config(),
                '--host', '127.0.0.1', '--port', (string) $port],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']],
            $pipes,
            $this->dir,
            $env,
        );
        if (!is_resource($process)) {
            throw new \RuntimeException('cannot start veil serve');
        }
        $this->process = $process;
    }

    private function waitReady(int $port, float $within): void
    {
        $deadline = microtime(true) + $within;
        $curl = curl_init("http://127.0.0.1:$port/healthz");
        curl_setopt_array($curl, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 2]);
        while (microtime(true) < $deadline) {
            if ($this->serverPid === null && is_file($this->dir . '/server.pid')) {
                $this->serverPid = (int) trim((string) file_get_contents($this->dir . '/server.pid')) ?: null;
            }
            if (!is_resource($this->process) || !proc_get_status($this->process)['running']) {
                throw new \RuntimeException("veil serve exited:\n" . $this->log());
            }
            $body = curl_exec($curl);
            if (curl_getinfo($curl, CURLINFO_RESPONSE_CODE) === 200 && is_string($body)) {
                curl_close($curl);
                return;
            }
            usleep(100_000);
        }
        curl_close($curl);
        throw new \RuntimeException("veil serve was not ready within $within s:\n" . $this->log());
    }

    private function kill(): void
    {
        if (is_resource($this->process)) {
            proc_terminate($this->process, 15);
            proc_close($this->process);
            $this->process = null;
        }
        if ($this->serverPid !== null && posix_kill($this->serverPid, 0)) {
            posix_kill($this->serverPid, 9);
        }
        $this->serverPid = null;
    }

    private static function freePort(): int
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
        if ($socket === false) {
            throw new \RuntimeException("no free port: $error");
        }
        $name = (string) stream_socket_get_name($socket, false);
        fclose($socket);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    private static function remove(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        $items = new \RecursiveIteratorIterator(
            new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS),
            \RecursiveIteratorIterator::CHILD_FIRST,
        );
        foreach ($items as $item) {
            $item->isDir() ? rmdir($item->getPathname()) : unlink($item->getPathname());
        }
        rmdir($dir);
    }
}
