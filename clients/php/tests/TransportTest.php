<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Client;
use Veil\Exception\ConnectionException;
use Veil\Exception\InvalidRequestException;
use Veil\Exception\TimeoutException;
use Veil\Tests\Support\VeilServer;

/** What the client does when the answer does not come: nothing twice, and how to find out. */
final class TransportTest extends TestCase
{
    /**
     * The padded dataset answers no earlier than 1.5 s after the request: a client that waits
     * 0.5 s times out after the service has charged the query. The exception names the query;
     * the history shows the charge committed; re-issuing the identical query is answered from
     * the cache at no cost — the query was charged exactly once.
     */
    public function testATimedOutQueryIsNotRetriedAndItsOutcomeIsLearnedFromTheHistory(): void
    {
        $dataset = VeilServer::PADDED;
        $sql = 'SELECT COUNT(*) AS n FROM people_padded WHERE age >= 65';
        $veil = self::client();
        $before = $veil->remainingBudget($dataset);

        try {
            self::client('alice', ['timeout' => 0.5])->query($dataset, $sql, ['epsilon' => 0.5]);
            self::fail('the padded query answered within 0.5 s');
        } catch (TimeoutException $e) {
            self::assertSame($dataset, $e->dataset);
            self::assertSame($sql, $e->sql);
            self::assertStringContainsString('may have charged', $e->getMessage());
            self::assertStringContainsString('from its cache at no cost', $e->getMessage());
        }

        [$charges, $status] = self::awaitCommitted(static fn (): array => array_values(
            array_filter($veil->history($dataset), static fn ($h) => $h->query === $sql),
        ));
        self::assertCount(1, $charges, 'charged once');
        self::assertSame('committed', $status);

        $again = $veil->query($dataset, $sql, ['epsilon' => 0.5]);
        self::assertTrue($again->cached);
        self::assertTrue($again->cost->isZero());
        $remaining = (float) $veil->remainingBudget($dataset)->epsilon;
        self::assertEqualsWithDelta((float) $before->epsilon - 0.5, $remaining, 1e-9, 'charged once');
    }

    public function testNothingListeningIsAConnectionErrorAndNothingWasSent(): void
    {
        $socket = stream_socket_server('tcp://127.0.0.1:0');
        $name = (string) stream_socket_get_name($socket, false);
        fclose($socket); // a port nothing listens on now

        $client = new Client('http://' . $name, 'some-key', ['connect_timeout' => 2]);
        $this->expectException(ConnectionException::class);
        $this->expectExceptionMessage('nothing was sent');
        $client->noisyCount(self::DATASET, 0.1);
    }

    public function testPlainHttpToAnotherHostIsRefusedBecauseTheKeyWouldTravelInClear(): void
    {
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('Use https://');
        new Client('http://veil.example.org', 'some-key');
    }
}
