<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Client;
use Veil\Exception\AuthenticationException;

final class AuthenticationTest extends TestCase
{
    public function testARevokedKeyIsRefused(): void
    {
        $bob = self::client('bob');
        self::assertSame('1', self::exactEpsilon($bob->remainingBudget(self::DATASET)));

        self::server()->revoke('bob'); // veil admin key revoke bob, while the server runs

        foreach ([
            static fn () => $bob->remainingBudget(self::DATASET),
            static fn () => $bob->noisyCount(self::DATASET, 0.1),
        ] as $call) {
            try {
                $call();
                self::fail('a revoked key was accepted');
            } catch (AuthenticationException $e) {
                self::assertSame('urn:veil:problem:unauthorized', $e->type());
                self::assertSame(401, $e->getCode());
                self::assertStringContainsString('Bearer', $e->problem?->headers['www-authenticate'] ?? '');
            }
        }
    }

    public function testAnUnknownKeyIsRefused(): void
    {
        $client = new Client(self::server()->baseUrl, 'not-a-key-anyone-was-given');
        $this->expectException(AuthenticationException::class);
        $this->expectExceptionMessage('veil admin analyst add');
        $client->budgets();
    }
}
