<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Budget;
use Veil\Client;
use Veil\Tests\Support\VeilServer;

/** The tests' base: clients of the real server the bootstrap started. */
abstract class TestCase extends \PHPUnit\Framework\TestCase
{
    protected const DATASET = VeilServer::DATASET;
    protected const MECHANISMS = VeilServer::MECHANISMS;

    protected static function server(): VeilServer
    {
        return VeilServer::get();
    }

    /** @param array<string, mixed> $options */
    protected static function client(string $analyst = 'alice', array $options = []): Client
    {
        $server = self::server();
        return new Client($server->baseUrl, $server->keys[$analyst], $options);
    }

    /**
     * The charges `$charges()` lists, polled until the first is committed (a timed-out query
     * still runs on the server) or 10 s have passed, and that first charge's status.
     *
     * @param callable(): list<object> $charges
     * @return array{0: list<object>, 1: ?string}
     */
    protected static function awaitCommitted(callable $charges): array
    {
        $deadline = microtime(true) + 10;
        while (true) {
            $found = $charges();
            $status = $found === [] ? null : $found[0]->status;
            if ($status === 'committed' || microtime(true) > $deadline) {
                return [$found, $status];
            }
            usleep(100_000);
        }
    }

    /** ε of a pure budget, exactly, as the ledger writes it ("1/2"). */
    protected static function exactEpsilon(Budget $budget): string
    {
        return $budget->exact['epsilon'] ?? '';
    }

    /**
     * Assert that a released value lies within `$bars` error bars of the truth. The error bar
     * is a 95 % half-width; for Laplace noise P(|noise| > 4 bars) = e^(−4 ln 20) ≈ 6e-6, so a
     * false failure at 4 bars is about one in 160 000 (the default).
     */
    protected static function assertNear(float $truth, float $value, float $errorBar, float $bars = 4.0): void
    {
        self::assertGreaterThan(0.0, $errorBar, 'a released number has a positive error bar');
        self::assertLessThanOrEqual(
            $bars * $errorBar,
            abs($value - $truth),
            sprintf('released %.6g is %.3g error bars from the truth %.6g (bar ±%.3g)',
                $value, abs($value - $truth) / $errorBar, $truth, $errorBar),
        );
    }
}
