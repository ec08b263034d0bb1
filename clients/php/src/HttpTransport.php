<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\ConnectionException;
use Veil\Exception\ServerException;
use Veil\Exception\TimeoutException;

/**
 * JSON over HTTP with curl, one handle kept between requests. It sends each request once: it
 * never retries, and it tells a failure before anything was sent ({@see ConnectionException})
 * from one after ({@see TimeoutException}: outcome unknown).
 *
 * A POST (which may charge a budget) always opens a fresh connection: on a reused keep-alive
 * connection that the server has closed, curl silently sends the request again, and a request
 * that charges must never be sent twice. GETs reuse the open connection.
 *
 * @internal
 */
final class HttpTransport
{
    private ?\CurlHandle $curl = null;

    public function __construct(
        private readonly string $baseUrl,
        #[\SensitiveParameter]
        private readonly string $apiKey,
        private readonly float $timeout,
        private readonly float $connectTimeout,
        private readonly string $userAgent,
    ) {
    }

    public function __destruct()
    {
        if ($this->curl !== null) {
            curl_close($this->curl);
        }
    }

    /**
     * Send one request and return its status, headers (names in lower case) and decoded JSON.
     *
     * @param array<string, mixed>|null $body sent as JSON (a POST); null: a GET
     * @param array{dataset?: string, sql?: string} $about what a TimeoutException names
     * @return array{0: int, 1: array<string, string>, 2: mixed}
     */
    public function send(string $method, string $path, ?array $body = null, array $about = []): array
    {
        $curl = $this->handle();
        $headers = [];
        $options = [
            CURLOPT_URL => $this->baseUrl . $path,
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_NOSIGNAL => true,
            CURLOPT_FRESH_CONNECT => $body !== null,
            CURLOPT_TIMEOUT_MS => (int) ceil($this->timeout * 1000),
            CURLOPT_CONNECTTIMEOUT_MS => (int) ceil($this->connectTimeout * 1000),
            CURLOPT_USERAGENT => $this->userAgent,
            CURLOPT_HTTPHEADER => [
                'Authorization: Bearer ' . $this->apiKey,
                'Accept: application/json, application/problem+json',
                'Content-Type: application/json',
                'Expect:',
            ],
            CURLOPT_HEADERFUNCTION => static function ($handle, string $line) use (&$headers): int {
                $colon = strpos($line, ':');
                if ($colon !== false) {
                    $headers[strtolower(trim(substr($line, 0, $colon)))] = trim(substr($line, $colon + 1));
                } elseif (str_starts_with($line, 'HTTP/')) {
                    $headers = []; // a new response (after a 100 Continue): forget the last
                }
                return strlen($line);
            },
        ];
        if ($body !== null) {
            $options[CURLOPT_POSTFIELDS] = json_encode(
                $body,
                JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE
                | JSON_PRESERVE_ZERO_FRACTION,
            );
        }
        curl_reset($curl); // keeps the open connection, forgets the last request's options
        curl_setopt_array($curl, $options);
        $text = curl_exec($curl);
        $errno = curl_errno($curl);
        if ($errno !== 0 || !is_string($text)) {
            throw $this->failure($curl, $errno, $method, $path, $about);
        }
        $status = (int) curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
        if ($text === '') {
            return [$status, $headers, null];
        }
        try {
            $decoded = json_decode($text, true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (\JsonException $e) {
            if ($status >= 400) {
                return [$status, $headers, null]; // a proxy's error page: the status says it
            }
            throw new ServerException(sprintf(
                '%s %s answered HTTP %d with a body that is not JSON',
                $method,
                $path,
                $status,
            ), null, $e);
        }
        return [$status, $headers, $decoded];
    }

    private function handle(): \CurlHandle
    {
        if ($this->curl === null) {
            $curl = curl_init();
            if ($curl === false) {
                throw new ConnectionException('curl_init() failed; is the curl extension working?');
            }
            $this->curl = $curl;
        }
        return $this->curl;
    }

    /** @param array{dataset?: string, sql?: string} $about */
    private function failure(
        \CurlHandle $curl,
        int $errno,
        string $method,
        string $path,
        array $about,
    ): ConnectionException|TimeoutException {
        $error = curl_error($curl) ?: curl_strerror($errno) ?? 'unknown error';
        // nothing was sent while curl had not finished connecting (and TLS): pretransfer is 0
        $sent = (float) curl_getinfo($curl, CURLINFO_PRETRANSFER_TIME) > 0.0;
        $notSent = [CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_PROXY];
        if (!$sent || in_array($errno, $notSent, true)) {
            return new ConnectionException(sprintf(
                'could not reach the veil service at %s (%s); nothing was sent, so nothing was '
                . 'charged — it is safe to try again',
                $this->baseUrl,
                $error,
            ));
        }
        $what = $errno === CURLE_OPERATION_TIMEDOUT
            ? sprintf('no answer within %.3g s', $this->timeout)
            : sprintf('the connection failed before the answer was complete (%s)', $error);
        $dataset = $about['dataset'] ?? null;
        if ($method === 'GET') {
            $advice = 'a GET charges nothing, so it is safe to send again';
        } elseif (str_starts_with($path, '/v1/query') && $dataset !== null) {
            $advice = sprintf(
                'the service may have charged it, so do not simply send it again. To learn the '
                . 'outcome, call history(%1$s) and find the charge with %2$s: `committed` — '
                . 're-issue the identical query, the service answers it from its cache at no '
                . 'cost; `reserved` — it is still running, look again later (re-issuing now is '
                . 'charged twice); `abandoned` — its worker stopped before answering: the charge '
                . 'stays, nothing was released, and re-issuing is charged again; none — nothing '
                . 'was spent. Set the client\'s timeout above the '
                . 'service\'s query_timeout_s: a slower query becomes a job this client waits for',
                var_export($dataset, true),
                isset($about['sql']) ? 'this SQL' : "this plan (its charge shows the plan's canonical JSON)",
            );
        } elseif (str_starts_with($path, '/v1/mechanisms/') && $dataset !== null) {
            $advice = sprintf(
                'the service may have charged it. Mechanism answers are not cached: sending it '
                . 'again draws fresh noise and is charged again; history(%s) shows whether this '
                . 'call was charged',
                var_export($dataset, true),
            );
        } else {
            $advice = 'the outcome is unknown';
        }
        return new TimeoutException(
            sprintf('%s %s: %s; %s', $method, $path, $what, $advice),
            $method,
            $path,
            $dataset,
            $about['sql'] ?? null,
        );
    }
}
